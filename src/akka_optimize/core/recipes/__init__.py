"""Recipe runs: ``minifield-worker`` recipes submitted to the service
(:mod:`.runs`) and where a recipe may read (:mod:`.paths`).
"""
