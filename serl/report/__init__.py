"""Reporting: metrics sinks, progress lines, and a run's report, figures and summary."""
