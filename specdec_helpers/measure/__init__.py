"""What is sent and what is timed: prompt sets, streamed requests, vLLM's counters, phases, load."""
