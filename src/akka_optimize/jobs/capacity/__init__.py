"""Capacity: device pools (:mod:`.pools`), claims (:mod:`.claims`), the ledger
of who holds and waits (:mod:`.ledger`) and the capacity report (:mod:`.usage`).
"""
