"""The study's tables (the BERT paper's Tables 5, 6 and 7, and ours) from our runs, and its claims as paired contrasts
with floors.

`tables` (the tables' layout), `collect` (reading results and per-item files), `cells` (table cells over seeds, with
floors), `claims` (declared contrasts via `multiboot` and `stats`, each pair (`pairs`) with its power (`power`) and
its family-wise reading (`family`)), `markdown`, `plots` and `render` (every report file), `evidence` (what the
statistics read, written beside the report) and `recompute` (claims.json again from the evidence alone, compared);
`scaling` (the budget sweep's report). `spec` is the `ablations` config as a plain dict.
"""
