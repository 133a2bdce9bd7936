"""Endpoints: their routes and OpenAI-compatible forwarding
(:mod:`.routes`), waiting for a worker and forwarding to it (:mod:`.forwarding`) and an
evaluation's ``model:`` judge (:mod:`.judges`).
"""
