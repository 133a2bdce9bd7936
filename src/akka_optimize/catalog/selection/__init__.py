"""Base-model selections: the state machine and listing (:mod:`.machine`),
the selection row (:mod:`.rows`) and the background fetcher (:mod:`.manager`).
"""
