"""The registry's routes: datasets, bundles, models, images, aliases
and annotations (:mod:`.routes`), a Tinker checkpoint registered as a model version
(:mod:`.from_tinker`), and streaming bodies in and out (:mod:`.transfer`).
"""
