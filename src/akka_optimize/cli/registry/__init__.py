"""The ``registry`` commands (:mod:`.commands`), their text output
(:mod:`.output`), packing local files for an upload (:mod:`.packing`) and moving bytes to
and from the registry routes (:mod:`.transfer`).
"""
