"""What a server delivers once it starts: serving benchmarks with stored workloads, and sweeps
over a preset's settings."""
