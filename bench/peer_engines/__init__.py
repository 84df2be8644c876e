"""The peer engines fp4moe's benchmarks time beside it (bench/peers.py).
Benchmark code only: nothing here is part of fp4moe."""
