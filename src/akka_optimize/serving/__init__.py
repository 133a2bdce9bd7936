"""Endpoints: serving engines, the endpoint worker, the OpenAI-compatible schema,
tool-call and reasoning parsers, and the post-deploy check (issue 8).

The service never runs a model itself: :mod:`.process` starts one
:mod:`.worker` process per resident base model, and :mod:`.manager` tracks which
endpoints and adapters each worker serves.
"""
