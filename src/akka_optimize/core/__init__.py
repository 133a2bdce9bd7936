"""The application core: request logic that is neither HTTP nor engine (issue 49)."""
