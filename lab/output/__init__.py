"""What locklab writes for people to read, beside the terminal: `locklab report`'s page.

- `svg`: the drawing module (Scale, axis, rect/line/text and every chart), the only
  module here that writes markup in Python;
- `published_numbers`: the document's numbers beside a record (declared or parsed);
- `report_view`: the page as a typed view model (frozen dataclasses) built from records;
- `html`: the view model through the jinja2 template (templates/), autoescaped.
"""
