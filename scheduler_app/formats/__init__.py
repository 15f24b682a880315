"""Date and time formats for the admin (settings.FORMAT_MODULE_PATH points here).

Django's English formats show "Jan. 1, 2024, 6:33 p.m.": minutes only, no zone. Runs last
seconds, so every instant the admin shows has seconds and names its zone.
"""
