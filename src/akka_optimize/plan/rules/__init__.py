"""The rules a parsed plan must pass (:mod:`.check` runs them all), one module
per concern, over the facts of :mod:`.facts`.
"""
