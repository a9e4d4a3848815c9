"""What locklab writes for people to read, beside the terminal: `locklab report`'s page.

- `svg`: the drawing module (Scale, axis, rect/line/text and every chart), the only
  module here that writes markup in Python;
- `published_numbers`: the document's numbers beside a record (declared or parsed).
"""
