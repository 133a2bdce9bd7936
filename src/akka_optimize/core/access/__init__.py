"""Who may see and change what: the access rules every route, the CLI and the
dashboard apply (:mod:`.rules`), in the terms of :mod:`.scope`, for registry artifacts
(:mod:`.registry`), runs (:mod:`.runs`) and the Tinker protocol (:mod:`.tinker`).
"""
