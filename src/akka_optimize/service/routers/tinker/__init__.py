"""The Tinker SDK's routes: the session protocol (:mod:`.protocol`), the
RestClient's runs and checkpoints (:mod:`.rest`), sampling (:mod:`.sampling`) and the
training client's worker poll (:mod:`.worker`).
"""
