"""The LoRA training session (:mod:`.training`), its passes (:mod:`.passes`),
its ranks on several devices (:mod:`.ranks`) and its saved state (:mod:`.state`).
"""
