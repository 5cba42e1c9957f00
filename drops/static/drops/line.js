// The waiting page, with JavaScript: news for everyone (sold out, units back, the line closed) shows at
// once. It reads the one shared news answer (GET /api/drops/<id>/news/, the same for every buyer, from
// Redis) every few seconds and reloads the page when what it says changes for this buyer; the page's own
// Refresh header paces the reads of the buyer's place, without JavaScript too.
(function () {
  "use strict";
  var section = document.querySelector("[data-line]");
  if (!section || section.dataset.state === "admitted" || section.dataset.state === "refused") return;
  var newsUrl = "/api/drops/" + section.dataset.line + "/news/";
  var shown = null;
  function check() {
    fetch(newsUrl, { credentials: "omit", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (news) {
        if (!news) return;
        var now = JSON.stringify([news.state, news.variants]);
        if (shown !== null && now !== shown) window.location.reload();
        shown = now;
      })
      .catch(function () {});
  }
  check();
  window.setInterval(check, 2000);
})();
