"""The Tinker SDK's wire protocol on the platform (DESIGN.md: package ``tinker/``)."""
