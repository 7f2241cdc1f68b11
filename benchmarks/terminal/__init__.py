"""The app itself, watching: what its UI costs the engine and where its CPU goes
(observer_overhead.py, ui_cost.py), what its sampler and its colouring cost (sampler_cost.py,
colour_cost.py), what it writes to the terminal and how fast a key lands (term_bytes.py,
key_latency.py), and hours of use (soak.py)."""
