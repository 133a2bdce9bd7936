"""The ``training runs`` commands: start and the dry run (:mod:`.start`), reading
runs (:mod:`.reading`), lineage (:mod:`.lineage`), saves and control (:mod:`.states`),
following a run (:mod:`.follow`) and older runs' settings text (:mod:`.settings_text`).
"""
