"""Endpoint records (:mod:`.records`), an endpoint's life: create, list,
delete, detach (:mod:`.lifecycle`), and the endpoints that serve evaluations' ``model:``
judges (:mod:`.judges`).
"""
