"""The BERT paper's Tables 5, 6 and 7 from our runs, and its claims as paired contrasts with floors.

`tables` (the tables' layout; light: the `configs` stage imports `tables_of`), `collect` (reading results and
per-item files), `cells` (table cells over seeds, with floors), `claims` (declared contrasts via `stats`), `markdown`,
`plots` and `render` (every report file); `scaling` (the budget sweep's report). `spec` is the `ablations` config as
a plain dict.
"""

from bertlab.report.tables import TABLES, tables_of

__all__ = ["TABLES", "tables_of"]
