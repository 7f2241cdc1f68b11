"""Watching what generates outside tokentop's process, and benchmarking a server: what attaching
costs a server (attach_overhead.py) and a user's script (script_overhead.py), launch to the first
frame attached (attach_launch.py), whether the client keeps up (chunk_rate.py, stream_client.py,
otlp_flood.py), a fleet through Prometheus (fleet_scale.py), the serving bench beside its peers
(peer_agreement.py: peer_vllm.py, peer_aiperf.py, vllm_bench_serve.py, pool.py, cpus.py,
server_clock.py; server_pace.py), the load generator's capacity (generator_capacity.py), and the
base install that goes beside a server (install.py)."""
