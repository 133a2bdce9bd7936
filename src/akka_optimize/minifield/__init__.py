"""The ``minifield-worker`` console script: versioned full-weight recipes (seeds/003).

Strategies (:mod:`.registry`), recipes (:mod:`.recipe`), rows (:mod:`.rows`), the packing
plan (:mod:`.plan`), one update (:mod:`.step`), the run (:mod:`.train`), ternary QAT
(:mod:`.ternary`), the ``minifield.ternary.v1`` export (:mod:`.export`), the computation
identity (:mod:`.identity`) and checkpoints (:mod:`.checkpoint`). Imports only ``data``
and ``engine`` building blocks (DESIGN.md).
"""
