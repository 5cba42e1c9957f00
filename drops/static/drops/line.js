// The waiting page, with JavaScript: news for everyone (sold out, units back, the line closed or paused)
// and the buyer's own admission show at once. The page listens to the push process's stream (server-sent
// events, DROP_EVENTS_URL, sent the pass cookie): it reloads when the news differs from what the page
// shows, or the place's state does ("place" events). If the stream cannot be reached it reads the one
// shared news answer (GET /api/drops/<id>/news/) every 2 s instead. The page's own Refresh header paces
// the reads of the buyer's place, without JavaScript too.
(function () {
  "use strict";
  var section = document.querySelector("[data-line]");
  if (!section || section.dataset.state === "admitted" || section.dataset.state === "refused") return;
  var shown = [section.dataset.newsState, section.dataset.units];
  function changed(news) {
    if (!news || !news.state) return false;
    var variant = null;
    Object.keys(news.variants || {}).forEach(function (id) {
      if (news.variants[id].sku === section.dataset.sku) variant = news.variants[id];
    });
    return news.state !== shown[0] || (variant !== null && variant.units !== shown[1]);
  }
  function poll() {
    window.setInterval(function () {
      fetch(section.dataset.newsUrl, { credentials: "omit", cache: "no-store" })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (news) { if (changed(news)) window.location.reload(); })
        .catch(function () {});
    }, 2000);
  }
  if (!window.EventSource || !section.dataset.eventsUrl) return poll();
  var opened = false;
  var stream = new EventSource(section.dataset.eventsUrl, { withCredentials: true });
  stream.onopen = function () { opened = true; };
  stream.addEventListener("place", function (event) {
    try { if (JSON.parse(event.data).state !== section.dataset.state) window.location.reload(); } catch (e) { /* not a place */ }
  });
  stream.onmessage = function (event) {
    try { if (changed(JSON.parse(event.data))) window.location.reload(); } catch (e) { /* not news */ }
  };
  stream.onerror = function () {
    if (!opened) { stream.close(); poll(); }  // no push process here: read the shared news instead
  };
})();
