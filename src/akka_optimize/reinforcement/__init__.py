"""Reinforcement runs (``config.method: rl``): the ``rl`` job kind (:mod:`.kind`),
its worker (:mod:`.worker`) and the rewards graded with the evaluations' graders
(:mod:`.rewards`); the engine's loop is :mod:`akka_optimize.engine.rl`.
"""
