"""The LoRA training engine: settings, a training session, the supervised loop, saves.

No HTTP or database code here; events leave through a callback (STYLE.md 6).
"""
