"""What a scenario and a record are: the lab's vocabulary, below every other layer.

errors, outcome (SQLSTATE and business outcomes), records and results (the JSON a run
writes, where it goes), scenario and steps (what a scenario module declares: `Scenario`,
`Env`, `Session`, `Pinned`), claims, published and seconds (what the documents publish
and how a claim checks it), catalogue, loader and profiles (which scenarios, cases and
knobs a verify runs), new (`locklab new`'s scaffold).
"""
