// Small progressive enhancements; every page works without them.
(function () {
  "use strict";

  // Reservation countdown on the order page.
  function startCountdowns() {
    document.querySelectorAll("[data-expires-at]").forEach(function (element) {
      var expiresAt = new Date(element.getAttribute("data-expires-at")).getTime();
      function tick() {
        var left = Math.max(0, Math.floor((expiresAt - Date.now()) / 1000));
        var minutes = Math.floor(left / 60), seconds = left % 60;
        element.textContent = minutes + ":" + String(seconds).padStart(2, "0");
        if (left > 0) { setTimeout(tick, 1000); } else { element.textContent = "0:00 (expired)"; }
      }
      tick();
    });
  }

  // A double click must not send a form twice (the server's idempotency key is the real guard).
  function submitOnce() {
    document.querySelectorAll("form[data-submit-once]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (form.dataset.submitted) { event.preventDefault(); return; }
        form.dataset.submitted = "1";
        form.querySelectorAll("button").forEach(function (button) { button.disabled = true; });
      });
    });
  }

  // Live availability on catalog and product pages, from the public API.
  function liveAvailability() {
    var elements = document.querySelectorAll("[data-available-for]");
    if (!elements.length) { return; }
    function refresh() {
      fetch("/api/products/?page_size=100", { headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (page) {
          if (!page) { return; }
          var available = {};
          page.results.forEach(function (product) { available[product.sku] = product.available; });
          elements.forEach(function (element) {
            var sku = element.getAttribute("data-available-for");
            if (!(sku in available)) { return; }
            var n = available[sku];
            element.innerHTML = n > 0 ? '<span class="in-stock">' + n + " available</span>" : '<span class="out-of-stock">Out of stock</span>';
          });
        })
        .catch(function () {});
    }
    setInterval(refresh, 5000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    startCountdowns();
    submitOnce();
    liveAvailability();
  });
})();
