"""Group-relative reinforcement updates: the loop (:mod:`.loop`), one update
(:mod:`.step`), its settings (:mod:`.settings`), off-policy rollouts
(:mod:`.offpolicy`), the log-probability gap (:mod:`.gap`) and ranks (:mod:`.ranks`).
"""
