"""What a scenario, a claim and a record are: the lab's vocabulary, below the harness.

The package: ``scenario`` and ``steps`` (what a scenario module declares: `Scenario`,
`Session` with its named steps, `Pinned`), ``env`` (what a scenario may use during one run,
`Env`, and an actor's signature), ``sqlfile`` (named SQL statements kept in a .sql file
beside a scenario's code), ``knobs`` (how the load arrives, and the parsers of its
options), ``outcome`` (an actor's end as one key: a business word, a SQLSTATE or
"timeout"), ``records`` and ``results`` (the shapes of what the lab writes, and the run
records' JSON files), ``provenance`` (what ran: the lab's version and commit, the Python,
the client libraries), ``claims``, ``published`` and ``seconds`` (documented expectations
as data, what the documents measured, claims on the published seconds), ``mutants``
(code with a guard dropped, run only as a claim's counterfactual), ``catalogue``
(every claim of the three documents by id, and the catalogue built from the code),
``profiles`` (the settings a scenario runs with in verify, and which claims a run can
judge), ``loader`` (a user's own scenario file, named on the command line), ``new``
(`locklab new`'s scaffold).
"""
