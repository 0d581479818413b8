"""Pure rules: business dates, report parsing, event intake, discrepancy classes and cases."""
