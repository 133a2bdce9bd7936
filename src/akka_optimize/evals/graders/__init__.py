"""What grades an answer: grader specifications and the submit-time check
of a bundle's entry (:mod:`.spec`), ``model:`` judges' instructions and scores
(:mod:`.judges`) and a worker's requests to a judge endpoint (:mod:`.judge_client`); the
sandbox that runs a bundle's code is :mod:`akka_optimize.evals.sandbox`.
"""
