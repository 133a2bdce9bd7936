"""Evaluations: grade a model's answers to a dataset with a registered grader."""
