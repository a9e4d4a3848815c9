(function () {
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message)); });
  document.addEventListener('securitypolicyviolation', function (e) {
    errors.push('csp: ' + e.violatedDirective + ' ' + e.blockedURI);
  });
  window.addEventListener('load', function () {
    var d = document.documentElement;
    d.setAttribute('data-svg-count', String(document.querySelectorAll('svg').length));
    d.setAttribute('data-errors', errors.length ? errors.join(' | ') : 'none');
    d.setAttribute('data-rendered', 'ok');
  });
})();
