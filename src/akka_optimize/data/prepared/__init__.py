"""Prepared token rows (seeds/001 F029, F030): reading and checking them
(:mod:`.rows`), the registry's canonical form (:mod:`.canonical`) and the
``prepared.json`` descriptor (:mod:`.descriptor`).
"""
