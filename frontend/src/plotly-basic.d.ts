// plotly.js-basic-dist-min has the API of plotly.js with fewer trace types; its types are plotly.js's.
declare module "plotly.js-basic-dist-min" {
  import * as Plotly from "plotly.js";
  export = Plotly;
}
