"""Running a bundle's grader outside the service's process, with limits: the
pool (:mod:`.pool`), its workers (:mod:`.workers`), their scratch space
(:mod:`.scratch`), the records (:mod:`.records`) and the child process (:mod:`.child`).
"""
