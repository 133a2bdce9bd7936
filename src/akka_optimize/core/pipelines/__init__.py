"""Pipelines: a descriptor of ordered stages run one after another as jobs
(:mod:`.records`), its form (:mod:`.shape`), its stages (:mod:`.stages`), how it moves
on (:mod:`.runs`) and its views (:mod:`.views`).
"""
