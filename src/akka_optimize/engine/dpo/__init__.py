"""Preference training: one update (:mod:`.update`), the loop (:mod:`.loop`)
and the losses (:mod:`.loss`).
"""
