"""Curations: the ``curate`` kind (:mod:`.kind`), the request check
(:mod:`.request`) and what a worker does (:mod:`.judging`).
"""
