"""Presets: every edit an immutable revision, and the flags each SGLang release accepts."""
