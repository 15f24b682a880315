// The job form's kind selectors (admin/jobkinds.py): show only the chosen kind's fields.
// Each selector lists, in data-cf-kinds, the fields of every kind. Without this script the
// page shows every field and the server still reads only the chosen kind's.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const select of document.querySelectorAll("select.cf-kind")) {
    const kinds = JSON.parse(select.dataset.cfKinds);
    const every = new Set(Object.values(kinds).flat());
    const show = () => {
      const chosen = new Set(kinds[select.value] || []);
      for (const name of every) {
        for (const row of document.querySelectorAll(".form-row.field-" + name)) {
          row.style.display = chosen.has(name) ? "" : "none";
        }
      }
    };
    select.addEventListener("change", show);
    show();
  }
});
