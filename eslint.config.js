// ESLint for goaai's JavaScript, loaded by the browser as it is (no build step): the
// web UI's ES modules (sessions_app/static/) and the admin timeline's script
// (runs_app/static/).
import js from "@eslint/js";
import globals from "globals";

export default [
  {
    // Vendored libraries are copied as they are published (make vendor).
    ignores: ["node_modules/", ".venv/", "staticfiles/", "build/", "**/vendor/"],
  },
  js.configs.recommended,
  {
    files: ["**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: globals.browser,
    },
    linterOptions: {
      reportUnusedDisableDirectives: "error",
    },
    rules: {
      "no-unused-vars": ["error", { args: "after-used", caughtErrors: "all" }],
      eqeqeq: ["error", "always"],
      "no-implicit-globals": "error",
      "no-var": "error",
      "prefer-const": "error",
      "no-shadow": "error",
      "no-use-before-define": ["error", { functions: false, classes: true, variables: true }],
      "no-eval": "error",
      "no-implied-eval": "error",
      "no-new-func": "error",
      "no-script-url": "error",
      "no-restricted-properties": [
        "error",
        { property: "innerHTML", message: "Set text with textContent and build nodes with createElement." },
        { property: "outerHTML", message: "Set text with textContent and build nodes with createElement." },
        { property: "insertAdjacentHTML", message: "Build nodes with createElement and insert them." },
      ],
      "no-restricted-syntax": [
        "error",
        {
          selector: "CallExpression[callee.object.name='document'][callee.property.name='write']",
          message: "Build nodes with createElement instead.",
        },
      ],
    },
  },
  {
    // The admin timeline is a classic script, included by the admin's templates.
    files: ["runs_app/static/**/*.js"],
    ignores: ["runs_app/static/runs_app/timeline-markdown.js"],
    languageOptions: { sourceType: "script" },
  },
];
