"""Real SGLang as the oracle the simulated SGLang is tested against."""
