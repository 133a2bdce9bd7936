"""OpenAI's fine-tuning API over this platform (issue 51), without HTTP.

Files are registry dataset versions (:mod:`.files`), jobs are runs (:mod:`.jobs`,
:mod:`.hyper`), graders are OpenAI's grader objects evaluated here (:mod:`.grading`,
:mod:`.similarity`, :mod:`.formula`) or translated into a reinforcement reward bundle
(:mod:`.bundle`); every refusal is OpenAI's error shape (:mod:`.errors`). The routers under
:mod:`akka_optimize.service.routers` (``openai_files``, ``openai_ft_jobs``,
``openai_graders``, ``openai_chat``) stay thin.
"""
