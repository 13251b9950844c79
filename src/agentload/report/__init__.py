"""Reports of a run: report.md, report.html, PNG charts and the console table."""

from agentload.report.build import build_document, write_report
from agentload.report.table import summary_table

__all__ = ["build_document", "summary_table", "write_report"]
