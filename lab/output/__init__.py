"""What is printed and drawn for people to read: the console (rich tables, timelines,
verdicts, the locks tree), `locklab report`'s HTML page and the pictures of pinned runs.

The package: on the console, ``console`` (the documents' result lines and rich tables),
``verdicts`` (the claims table and the summary line of `locklab verify`), ``matrix``
(`verify --matrix`'s table), ``runs`` (`locklab results` and `locklab diff`) over ``diff``
(the listing of recorded runs and what changed between two), ``timeline`` (a record's
spans as text bars on one time axis), ``locks`` (the pg_blocking_pids() tree and
`locks --watch`), ``explore`` (an explore record's table of interleavings), ``actors``
(what trace and explore print for unchanged programs through the gate), ``bench`` (what
`locklab bench` prints), ``provenance`` (`locklab --version`), ``headline`` (the README's
table of the documents' numbers beside a recorded verify's).

The page and the pictures: ``report`` (`locklab report RUN`: one self-contained page),
``report_view`` and ``scenario_view`` (the page and each scenario's section as a typed view
model built from records), ``published_numbers`` (the documents' numbers beside a
record), ``html`` (the view model through the jinja2 template in templates/, autoescaped),
``svg`` (the charts: the only module here that writes markup in Python), ``trace_svg`` (a
pinned run as one SVG, a lane per session), ``pictures`` (what a trace or explore record
draws, and the pictures of a run's folder for the report).
"""
