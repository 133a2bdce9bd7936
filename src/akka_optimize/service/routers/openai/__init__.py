"""OpenAI's API served by the platform: chat completions (:mod:`.chat`),
files (:mod:`.files`), fine-tuning jobs (:mod:`.ft_jobs`) and graders (:mod:`.graders`),
with the request reading and error shape they share (:mod:`.common`); the logic is
:mod:`akka_optimize.core.openai_ft`.
"""
