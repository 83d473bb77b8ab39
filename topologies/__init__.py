"""Built-in topology presets (YAML). Installed as simulator.builtin.topologies."""
