// The dashboard's static files (src/http/dashboard_assets/: index.html, app.js, app.css),
// embedded into the binary at build time by the `dashboard_assets_cc` genrule
// (embed_assets.py), so the head serves them with nothing installed beside it. Read-only data;
// thread-safe.
#pragma once

#include <map>
#include <string>

namespace troupe::http {

struct EmbeddedAsset {
  std::string content_type;
  std::string body;
};

// File name (e.g. "app.js") -> contents. Only these names are ever served.
const std::map<std::string, EmbeddedAsset>& DashboardAssets();

}  // namespace troupe::http
