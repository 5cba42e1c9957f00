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
        // A disabled button is not sent: the one pressed ("Update totals" or "Place order") travels
        // as a hidden field instead, so the server still knows which it was.
        var pressed = event.submitter;
        if (pressed && pressed.name) {
          var kept = document.createElement("input");
          kept.type = "hidden";
          kept.name = pressed.name;
          kept.value = pressed.value;
          form.appendChild(kept);
        }
        form.querySelectorAll("button").forEach(function (button) { button.disabled = true; });
      });
    });
  }

  // Live availability on catalog and product pages, from the public API: the same answer the API gives.
  // A product page asks for its one product; every few seconds at most, never faster.
  function availabilityHtml(product) {
    if (!product.sale_open) { return '<span class="opens">Opens soon</span>'; }
    if (product.sold_out) { return '<span class="out-of-stock">Sold out</span>'; }
    return '<span class="in-stock">' + product.available + " available</span>";
  }

  function liveAvailability() {
    var elements = document.querySelectorAll("[data-available-for]");
    if (!elements.length) { return; }
    var one = document.querySelector("[data-one-product]");
    // A product page with a picker asks for all its variants: a size selling out disables its choice.
    var variantsOf = document.querySelector("[data-variants-of]");
    var url = variantsOf
      ? "/api/products/?page_size=100&product=" + encodeURIComponent(variantsOf.getAttribute("data-variants-of"))
      : one ? "/api/products/" + encodeURIComponent(one.getAttribute("data-available-for")) + "/" : "/api/products/?page_size=100";
    function show(products) {
      var bySku = {};
      products.forEach(function (product) { bySku[product.sku] = product; });
      elements.forEach(function (element) {
        var product = bySku[element.getAttribute("data-available-for")];
        if (!product || !product.sale_open) { return; }  // an opening sale is shown by reloading (below)
        element.innerHTML = availabilityHtml(product);
        document.querySelectorAll('[data-add-for="' + product.sku + '"]').forEach(function (button) {
          button.disabled = product.sold_out;
        });
      });
      document.querySelectorAll("[data-choice-for]").forEach(function (choice) {
        var product = bySku[choice.getAttribute("data-choice-for")];
        if (!product) { return; }
        var soldOut = product.sold_out || !product.sale_open;
        choice.classList.toggle("sold-out", soldOut);
        if (soldOut) { choice.setAttribute("aria-disabled", "true"); } else { choice.removeAttribute("aria-disabled"); }
      });
    }
    function refresh() {
      fetch(url, { headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (answer) { if (answer) { show(answer.results || [answer]); } })
        .catch(function () {});
    }
    setInterval(refresh, 5000);
  }

  // Before a sale opens, the product page counts down (from the server's clock) and reloads at the start.
  function saleCountdown() {
    document.querySelectorAll("[data-opens-in]").forEach(function (element) {
      var opensAt = Date.now() + Number(element.getAttribute("data-opens-in")) * 1000;
      function tick() {
        var left = Math.max(0, Math.ceil((opensAt - Date.now()) / 1000));
        var hours = Math.floor(left / 3600), minutes = Math.floor((left % 3600) / 60), seconds = left % 60;
        element.textContent = (hours ? hours + ":" + String(minutes).padStart(2, "0") : minutes) + ":" + String(seconds).padStart(2, "0");
        if (left > 0) { setTimeout(tick, 1000); } else { window.location.reload(); }
      }
      tick();
    });
  }

  // Checkout: a change of country, method or billing choice shows the page again, priced for it (the
  // "Update totals" button does the same without JavaScript).
  function refreshOnChange() {
    document.querySelectorAll("form[data-checkout]").forEach(function (form) {
      var button = form.querySelector("[data-refresh-button]");
      if (!button) { return; }
      form.querySelectorAll("[data-refresh-on-change]").forEach(function (field) {
        field.addEventListener("change", function () { form.requestSubmit(button); });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    refreshOnChange();
    startCountdowns();
    submitOnce();
    liveAvailability();
    saleCountdown();
  });
})();
