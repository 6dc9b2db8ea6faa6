"""The cost model of speculative decoding and what turns measurements into a decision."""
