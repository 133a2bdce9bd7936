"""The run descriptor (:mod:`.run`) and its groups: the base of every body
(:mod:`.base`), ``config``, ``execution``, the hyperparameters and ``dpoHyperparams``.
"""
