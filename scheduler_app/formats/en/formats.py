# Django date-format characters: https://docs.djangoproject.com/en/5.2/ref/templates/builtins/#date
DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
YEAR_MONTH_FORMAT = "F Y"
MONTH_DAY_FORMAT = "F j"
