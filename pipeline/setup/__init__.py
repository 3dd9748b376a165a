"""A run before it starts: its typed config (RunConfig, field metadata, presets), its prompts, and the checks
on them (custom rewards, the GPU memory estimate)."""
