"""Built-in workload presets (YAML). Installed as simulator.builtin.workloads."""
